"""From a configuration to a kernel: render a template's Jinja source and compile it with NVRTC (one process or
a compile pool)."""
