"""What the published ``amrita-plugin-memory`` (PyPI, 0.4.0 – 0.8.1) stored, recognised and
converted into this plugin's forms.

Both packages implement the same spec under the same names (package, tables, collections,
migration revisions), so a bot that ran the published plugin can switch to this one on its
data directory. The published forms are described here from reading its releases (nothing
of its code is used): :mod:`.tables` (its two tables, which claim this plugin's first two
revisions with other columns), :mod:`.loop_state` (its L3 loop's state document) and
:mod:`.memories` (its memories' Chroma metadata). The work done with them lives above:
the migration ``c4e82b7d5f13`` (tables), ``upkeep/adoption`` and ``embedding/adoption``
(memories), ``subconscious/published_files`` (knowledge base, profile, prompt templates).
"""
