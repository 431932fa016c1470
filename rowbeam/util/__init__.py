"""Small shared utilities (no Blender): one-line errors, blockwise array work, worker threads, progress."""
