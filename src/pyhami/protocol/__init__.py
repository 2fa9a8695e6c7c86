"""pyhami.protocol"""
