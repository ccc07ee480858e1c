"""The whole pipeline on this machine: the stack (:mod:`.stack`), its live view (:mod:`.runner`),
the resync tick (:mod:`.ticker`) and the ``local`` command (:mod:`.cli`)."""
