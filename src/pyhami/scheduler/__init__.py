"""pyhami.scheduler"""
