"""pyhami.deviceplugin"""
