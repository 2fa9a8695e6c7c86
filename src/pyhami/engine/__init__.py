"""pyhami.engine"""
