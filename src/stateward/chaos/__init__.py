"""The crash and race harness behind ``stateward chaos``: kill workers everywhere, prove nothing broke."""
