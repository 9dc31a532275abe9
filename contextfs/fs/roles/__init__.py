"""The role handlers: what each part of the tree shows and what happens to it."""
