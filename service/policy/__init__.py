"""Policy I/O: the one prompt renderer, the one response parser, the output grammar, and engines."""
