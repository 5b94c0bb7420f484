"""The slot control plane: operators change what a slot serves, every replica follows."""
