"""pyhami.testing"""
