"""``notee worker``, a process (rank 4): claim fan-out tasks, page recipients out of Cassandra, send
them through the providers, checkpoint (docs/FANOUT.md).

    lane --claim--> task: reader --page--> bounded queue (2 pages) --> sender --> checkpoint (MySQL)

* ``process``: the process (metrics, heartbeat, signals and the stop grace) around one ``Worker``.
* ``lanes``: ``Worker``, its lanes: the claim loop, idle turns, when a lane gives its task back.
* ``task``: ``TaskRun``, one claimed task: its page loop, checkpoints, and what each error means.
* ``reader``: ``PageReader``, a task's pages read ahead of its sender; ``messages``: ``messages_for``, a
  page as messages.
* ``outage``: what counts as an outage, and the backoff after one.

Per device: no MySQL and no Cassandra query. Per task: one job read (the rendered payload). Per
page: one Cassandra page read and one MySQL checkpoint.
"""
