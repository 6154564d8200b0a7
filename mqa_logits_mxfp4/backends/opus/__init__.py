"""opus: native HIP/CUDA C++ kernels (csrc/) built with ninja + pybind11 on first use."""
