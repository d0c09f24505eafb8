"""The network layer of the OS providers: the one network-rule compiler
(:mod:`pysb_core.net.netfilter`) and the filtered namespace networks of unshare and
bwrap (:mod:`pysb_core.net.netns`).
"""
