"""Serving tuned kernels: lookup with the vendor guard, the online choice for untuned problems, launchers on the
caller's stream, the public calls (autotune.gemm, autotune.conv2d) and the torch backend and workload recording."""
