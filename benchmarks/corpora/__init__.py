"""The benchmark corpora built from material on this machine (Python source, the Debian handbook)."""
