"""pyhami.monitor"""
