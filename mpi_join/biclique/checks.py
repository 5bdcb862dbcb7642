"""What `biclique` checks in a job before it runs (named in the registry)."""
from ..join import aggregate
from ..errors import ConfigError
from .graph import SIDES, build


def aggregated(job):
    """(stream, column) an aggregate reads of every pair (its units hold them)."""
    text = job.strategy.params["aggregate"]
    return aggregate.parse(text, job.streams).columns if text else ()


def check_job(job, nranks):
    p = job.strategy.params
    where = f"{job.path}: strategy"
    merger = bool(p["aggregate"])
    if merger:
        try:
            aggregate.parse(p["aggregate"], job.streams, f"{where}.aggregate")
        except ConfigError as e:
            return str(e)
    if (p["r_groups"] > 1 or p["s_groups"] > 1) and not job.predicate.equi:
        return (f"{where}: r_groups = {p['r_groups']}, s_groups = {p['s_groups']} route by the equi key's hash "
                f"(ContRand), and this predicate has no equi condition; use r_groups = s_groups = 1 (random routing)")
    need = 1 + p["dispatchers"] + 2 + merger
    if nranks < need:
        return (f"strategy 'biclique' with {p['dispatchers']} dispatcher(s) needs at least {need} MPI ranks (the "
                f"shuffler, the dispatchers, one R-unit and one S-unit{', the merger' if merger else ''}), got {nranks}")
    r, s = (len(build(nranks, p).ranks(g)) for g in SIDES)
    if p["r_units"] and p["r_units"] != r:
        return (f"{where}.r_units: {p['r_units']} R-units leave no S-unit with {nranks} ranks and "
                f"{p['dispatchers']} dispatcher(s); at most {nranks - 2 - p['dispatchers'] - merger}")
    spare = p["spare_units"] if p["scaling"] else 0
    for name, groups, units in (("r_groups", p["r_groups"], r), ("s_groups", p["s_groups"], s)):
        if groups > units - spare:
            return (f"{where}.{name}: {groups} subgroups but only {units - spare} active unit(s) on that side with "
                    f"{nranks} ranks" + (f" and spare_units = {spare}" if spare else ""))
    if p["scaling"] and not p["t_low"] < p["psi"] < p["t_high"]:
        return (f"{where}: scaling needs t_low < psi < t_high (Equation 7 aims between them), got t_low = "
                f"{p['t_low']:g}, psi = {p['psi']:g}, t_high = {p['t_high']:g}")
    if p["scaling"] and not p["unit_capacity_mb"]:
        return f"{where}.unit_capacity_mb: scaling needs a unit capacity above 0"
    return None


def check_matrix(job, nranks):
    rows, workers = job.strategy.params["rows"], nranks - 1
    if job.predicate.asof is not None and rows:
        return (f"{job.path}: strategy.rows: an ASOF join puts each left row in one cell with every right row (a "
                f"grid of one {'column' if job.predicate.asof.left == 0 else 'row'}); leave rows unset")
    if rows and workers % rows:
        return (f"{job.path}: strategy.rows: {rows} rows do not divide the {workers} workers of {nranks} ranks into "
                f"a grid; use a divisor of {workers}, or 0 to choose one")
    return None
