"""Tuning and benchmarking: timing, the torch reference path, shape suites."""
