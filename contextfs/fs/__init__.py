"""The filesystem: `tree` (what the memory looks like as POSIX, pure Python) and `ops`
(the pyfuse3 adapter)."""
