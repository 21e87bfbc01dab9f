#!/bin/bash
echo 'Hello, world!' > hello.txt
