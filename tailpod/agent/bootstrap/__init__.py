"""Starts and guards the engine on the pod: engine start/stop/relaunch, machine facts, the
MTP overlay, the dead-man daemon, the one pod-side termination table and the stage-0 guard."""
