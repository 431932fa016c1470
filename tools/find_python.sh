#!/usr/bin/env bash
# tools/find_python.sh 3.13 -> the path of a working Python of that version (PATH, ~/.pyenv, /usr), or nothing.
# Used by the Makefile (make demo/test need 3.13; make test-matrix also 3.11) and tools/test_matrix.sh.
v=$1
for c in "python$v" "$HOME"/.pyenv/versions/"$v"*/bin/"python$v" /usr/bin/"python$v" /usr/local/bin/"python$v"; do
  if "$c" -c "import sys; assert sys.version_info[:2] == tuple(map(int, '$v'.split('.')))" 2>/dev/null; then
    command -v "$c" 2>/dev/null || echo "$c"
    exit 0
  fi
done
