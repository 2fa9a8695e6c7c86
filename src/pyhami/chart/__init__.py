"""pyhami's Helm chart seen from the command line: converting HAMi's values."""
