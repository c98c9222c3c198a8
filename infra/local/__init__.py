"""The local stack: simulators and generators that let the real code run on one machine."""
