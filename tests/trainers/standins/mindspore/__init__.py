"""Stand-in for the `mindspore` package (see ../README.md): only what `mindspore.train` needs."""
