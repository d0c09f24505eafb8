"""Built-in plugins and the built-in ``subprocess`` provider."""
