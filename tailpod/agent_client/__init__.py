"""The laptop side of the pod agent: build the zipapp, drive it over SSH, arm the dead-man switch."""
