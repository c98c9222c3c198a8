"""`python -m tether_local.vast_sim --count 400 --seed 7`: print a seeded offer book (`offers`).

The command lives on the package because the package imports `offers` (the simulator's book is
built from it): `python -m tether_local.vast_sim.offers` runs too, but runpy then warns that the
module was imported before it ran as `__main__`.
"""

from tether_local.vast_sim.offers import main

if __name__ == "__main__":
    raise SystemExit(main())
