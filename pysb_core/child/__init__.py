"""Code that runs inside the sandboxed interpreter, before (and around) the program."""
