"""Hub high availability: a leader lease with fencing epochs and the control state shared in PostgreSQL.

:mod:`hub.ha.lease` decides who leads from a :class:`hub.ha.lease.LeaseStore`
(:mod:`hub.ha.memory` in one process, :mod:`hub.ha.pg_lease` in PostgreSQL);
:mod:`hub.ha.pg_state` keeps the apps, their plan history and the plan
versions in the same database, every write fenced by the leader's epoch;
:mod:`hub.ha.node` runs a hub as a standby until it leads.
"""
