#!/bin/bash
# Passes when hello.txt holds exactly one line, "Hello, world!".
set -e
test -f hello.txt || { echo "hello.txt is missing"; exit 1; }
[ "$(cat hello.txt)" = "Hello, world!" ] || { echo "hello.txt has the wrong content"; exit 1; }
[ "$(wc -l < hello.txt)" -le 1 ] || { echo "hello.txt has more than one line"; exit 1; }
echo "ok"
