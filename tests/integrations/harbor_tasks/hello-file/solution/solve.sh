#!/bin/bash
echo "Hello, $(cat /app/name.txt)!" > /app/hello.txt
