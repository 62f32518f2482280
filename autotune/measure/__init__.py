"""Running compiled candidates on the GPU: verification against float64, L2-flushed timing, the vendor baseline,
energy (NVML), launch streams, and the GPU worker the search drives."""
