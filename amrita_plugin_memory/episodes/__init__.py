"""Conversation episodes (issue #48): waiting lines split into conversations, each ended
one kept as an episode with a summary (the background model's, or extracted), and the
episodes of a period recalled in an ``<EPISODES>`` block."""
