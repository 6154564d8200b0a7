"""flydsl: FlyDSL kernels for AMD gfx950 (scaled MFMA)."""
