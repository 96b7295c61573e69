"""The sweep: plans, arms, gates, the bare decode, the KL evaluation and the card matrix."""
