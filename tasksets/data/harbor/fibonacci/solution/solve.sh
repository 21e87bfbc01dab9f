#!/bin/bash
cat > fib.sh <<'SCRIPT'
a=0
b=1
for _ in $(seq 10); do
  echo "$a"
  next=$((a + b))
  a=$b
  b=$next
done
SCRIPT
