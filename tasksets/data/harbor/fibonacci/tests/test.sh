#!/bin/bash
# Passes when `bash fib.sh` prints 0 1 1 2 3 5 8 13 21 34, one per line.
test -f fib.sh || { echo "fib.sh is missing"; exit 1; }
expected="0
1
1
2
3
5
8
13
21
34"
actual="$(timeout 10 bash fib.sh)"
[ "$actual" = "$expected" ] || { echo "wrong output:"; echo "$actual"; exit 1; }
echo "ok"
