#!/bin/bash
# The checks live in a Python file next to this one; it writes the reward.
python3 /tests/check_hello.py
