"""pysb-proxy: egress by URL, method and path, through a proxy on the host.

The profile's ``egress:`` rules are judged per connection by a proxy that pysb starts and
stops with the sandbox; ``secrets:`` are headers the proxy adds for one host, whose values
never enter the sandbox. See docs/egress.md.
"""

__version__ = "0.1.0"
