"""Shared audio code for the audio slots: decoding, resampling and segmentation of input,
mel features, encoding of output, reading of cloning references.

No Ray and no MLX here: everything is numpy, soundfile and an ffmpeg subprocess.
"""
