"""The image slot: text-to-image and image-to-image with mflux (FLUX.2-klein, Z-Image-Turbo)."""
