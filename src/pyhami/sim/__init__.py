"""pyhami.sim"""
