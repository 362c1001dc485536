"""The FPGA target: HLS C++ over a hand-written kernel library, verified by C-simulation."""
