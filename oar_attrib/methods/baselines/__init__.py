"""The baselines the OAR methods are measured against: token entropy, integrated gradients,
GRAIL, KTAE and random scores, each registered like any method."""
