"""Issue 39: the same question through the command line, import evalset and the service gives the same rows."""
