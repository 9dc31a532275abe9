"""The filesystem: `tree` (every operation dispatched by role, pure Python) over `table` (the
inode table) and `roles` (the role handlers), assembled by `build`; `ops` is the pyfuse3
adapter."""
