"""Operator actions: republish exactly once (republish.py), close and reopen (close.py), bulk jobs
(bulk/). decisions.py says whether an action may be done, intents.py, publishing.py and
recovery.py carry a republish from its committed intent to the broker's answer, errors.py says
why an action was not done.
"""
