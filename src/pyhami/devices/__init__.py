"""pyhami.devices"""
