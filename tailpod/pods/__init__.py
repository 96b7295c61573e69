"""Pods as one protocol (up, relaunch, agent, down) over cloud and local, so no caller chooses by hand."""
