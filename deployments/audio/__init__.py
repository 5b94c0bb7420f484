"""Shared audio code for the audio slots: decoding, resampling, segmentation (and encoding).

No Ray and no MLX here: everything is numpy, soundfile and an ffmpeg subprocess.
"""
