"""pyhami.kube"""
