------------------------------- MODULE KvRaft -------------------------------
(***************************************************************************)
(* A model of the replicated log behind the build tasks' key-value store:  *)
(* leader election and log replication with an election quorum QE and a   *)
(* replication quorum QR. With QE = QR = a majority it is Raft; a task on  *)
(* flexible quorums sets them apart (2 * QE > N and QE + QR > N).          *)
(*                                                                         *)
(* Messages live in a set: a message may be delivered any number of times *)
(* (duplication), in any order (reordering), or never (loss). A server     *)
(* that restarts keeps only what it stored: its term, its vote, its log.   *)
(* Client operations are log entries; the store applies committed entries *)
(* in log order, so the safety properties below are what makes the store  *)
(* linearizable (reads go through the log too).                           *)
(***************************************************************************)
EXTENDS Naturals, Sequences, FiniteSets

CONSTANTS Server, QE, QR, Values, MaxTerm

ASSUME /\ QE \in 1..Cardinality(Server) /\ QR \in 1..Cardinality(Server)
       /\ 2 * QE > Cardinality(Server) /\ QE + QR > Cardinality(Server)

VARIABLES
    term,        \* stored: the latest term a server has seen
    votedFor,    \* stored: whom it voted for in term[s], or None
    log,         \* stored: a sequence of [term |-> t, value |-> v]
    role,        \* volatile: "follower", "candidate" or "leader"
    votes,       \* volatile: grants a candidate has received in its term
    commit,      \* volatile: the highest index a server knows committed
    stored,      \* volatile, leaders only: stored[s][p], how far p's log matches
    msgs         \* every message ever sent and not lost

vars == <<term, votedFor, log, role, votes, commit, stored, msgs>>
None == CHOOSE x : x \notin Server
Quorum(k) == {Q \in SUBSET Server : Cardinality(Q) >= k}
LastTerm(l) == IF Len(l) = 0 THEN 0 ELSE l[Len(l)].term
Min(a, b) == IF a < b THEN a ELSE b

Init ==
    /\ term = [s \in Server |-> 0]
    /\ votedFor = [s \in Server |-> None]
    /\ log = [s \in Server |-> <<>>]
    /\ role = [s \in Server |-> "follower"]
    /\ votes = [s \in Server |-> {}]
    /\ commit = [s \in Server |-> 0]
    /\ stored = [s \in Server |-> [p \in Server |-> 0]]
    /\ msgs = {}

\* A server that sees a later term adopts it and follows; its vote is reset.
Adopt(s, t) ==
    /\ term' = [term EXCEPT ![s] = t]
    /\ votedFor' = [votedFor EXCEPT ![s] = None]
    /\ role' = [role EXCEPT ![s] = "follower"]

Timeout(s) ==
    /\ role[s] # "leader"
    /\ term[s] < MaxTerm
    /\ term' = [term EXCEPT ![s] = term[s] + 1]
    /\ votedFor' = [votedFor EXCEPT ![s] = s]
    /\ role' = [role EXCEPT ![s] = "candidate"]
    /\ votes' = [votes EXCEPT ![s] = {s}]
    /\ msgs' = msgs \cup {[type |-> "vote?", term |-> term[s] + 1, from |-> s,
                           lastTerm |-> LastTerm(log[s]), lastIndex |-> Len(log[s])]}
    /\ UNCHANGED <<log, commit, stored>>

\* A vote is granted once per term, and only to a candidate whose log is at least as
\* up to date: a later last term, or the same last term and at least as long.
GrantVote(s, m) ==
    /\ m.type = "vote?" /\ m.from # s /\ m.term >= term[s]
    /\ LET t == m.term
           free == (m.term > term[s]) \/ votedFor[s] \in {None, m.from}
           upToDate == \/ m.lastTerm > LastTerm(log[s])
                       \/ /\ m.lastTerm = LastTerm(log[s])
                          /\ m.lastIndex >= Len(log[s])
       IN /\ free /\ upToDate
          /\ term' = [term EXCEPT ![s] = t]
          /\ votedFor' = [votedFor EXCEPT ![s] = m.from]
          /\ role' = [role EXCEPT ![s] = IF t > term[s] THEN "follower" ELSE role[s]]
          /\ msgs' = msgs \cup {[type |-> "vote!", term |-> t, from |-> s, to |-> m.from]}
    /\ UNCHANGED <<log, votes, commit, stored>>

CountVote(s, m) ==
    /\ m.type = "vote!" /\ m.to = s /\ m.term = term[s] /\ role[s] = "candidate"
    /\ votes' = [votes EXCEPT ![s] = votes[s] \cup {m.from}]
    /\ UNCHANGED <<term, votedFor, log, role, commit, stored, msgs>>

\* A leader needs an election quorum; it starts with a no-op entry of its own term,
\* which is what lets it commit what earlier terms left uncommitted.
BecomeLeader(s) ==
    /\ role[s] = "candidate" /\ votes[s] \in Quorum(QE)
    /\ role' = [role EXCEPT ![s] = "leader"]
    /\ log' = [log EXCEPT ![s] = Append(log[s], [term |-> term[s], value |-> "noop"])]
    /\ stored' = [stored EXCEPT ![s] = [p \in Server |-> IF p = s THEN Len(log[s]) + 1 ELSE 0]]
    /\ UNCHANGED <<term, votedFor, votes, commit, msgs>>

ClientWrite(s, v) ==
    /\ role[s] = "leader"
    /\ log' = [log EXCEPT ![s] = Append(log[s], [term |-> term[s], value |-> v])]
    /\ stored' = [stored EXCEPT ![s][s] = Len(log[s]) + 1]
    /\ UNCHANGED <<term, votedFor, role, votes, commit, msgs>>

\* The leader sends p the entries after index i, with the term of entry i.
Replicate(s, p, i) ==
    /\ role[s] = "leader" /\ p # s /\ i \in 0..Len(log[s])
    /\ msgs' = msgs \cup {[type |-> "append?", term |-> term[s], from |-> s, to |-> p,
                           prevIndex |-> i,
                           prevTerm |-> IF i = 0 THEN 0 ELSE log[s][i].term,
                           entries |-> SubSeq(log[s], i + 1, Len(log[s])),
                           commit |-> commit[s]]}
    /\ UNCHANGED <<term, votedFor, log, role, votes, commit, stored>>

\* A follower accepts entries only after an entry it holds with the same index and term;
\* an entry that conflicts (same index, another term) is removed with all after it.
Accept(s, m) ==
    /\ m.type = "append?" /\ m.to = s /\ m.term >= term[s]
    /\ m.prevIndex <= Len(log[s])
    /\ m.prevIndex = 0 \/ log[s][m.prevIndex].term = m.prevTerm
    /\ LET kept == SubSeq(log[s], 1, m.prevIndex)
           last == m.prevIndex + Len(m.entries)
           agrees == /\ Len(log[s]) >= last
                     /\ \A k \in 1..Len(m.entries) : log[s][m.prevIndex + k] = m.entries[k]
       IN /\ log' = [log EXCEPT ![s] = IF agrees THEN log[s] ELSE kept \o m.entries]
          /\ commit' = [commit EXCEPT ![s] = IF m.commit > commit[s]
                                             THEN Min(m.commit, last) ELSE commit[s]]
          /\ msgs' = msgs \cup {[type |-> "append!", term |-> m.term, from |-> s,
                                 to |-> m.from, match |-> last]}
    /\ term' = [term EXCEPT ![s] = m.term]
    /\ votedFor' = [votedFor EXCEPT ![s] = IF m.term > term[s] THEN None ELSE votedFor[s]]
    /\ role' = [role EXCEPT ![s] = "follower"]
    /\ UNCHANGED <<votes, stored>>

Acknowledged(s, m) ==
    /\ m.type = "append!" /\ m.to = s /\ m.term = term[s] /\ role[s] = "leader"
    /\ stored' = [stored EXCEPT ![s][m.from] = IF m.match > @ THEN m.match ELSE @]
    /\ UNCHANGED <<term, votedFor, log, role, votes, commit, msgs>>

\* An entry commits once a replication quorum (the leader included) stores it, and only
\* an entry of the leader's own term is counted; earlier ones commit beneath it.
AdvanceCommit(s, i) ==
    /\ role[s] = "leader" /\ i > commit[s] /\ i <= Len(log[s])
    /\ log[s][i].term = term[s]
    /\ {p \in Server : stored[s][p] >= i} \in Quorum(QR)
    /\ commit' = [commit EXCEPT ![s] = i]
    /\ UNCHANGED <<term, votedFor, log, role, votes, stored, msgs>>

StepDown(s, m) ==
    /\ m.term > term[s] /\ m.type \in {"vote!", "append!"}
    /\ Adopt(s, m.term)
    /\ UNCHANGED <<log, votes, commit, stored, msgs>>

\* A crash loses everything not stored.
Restart(s) ==
    /\ role' = [role EXCEPT ![s] = "follower"]
    /\ votes' = [votes EXCEPT ![s] = {}]
    /\ commit' = [commit EXCEPT ![s] = 0]
    /\ stored' = [stored EXCEPT ![s] = [p \in Server |-> 0]]
    /\ UNCHANGED <<term, votedFor, log, msgs>>

Lose(m) ==
    /\ msgs' = msgs \ {m}
    /\ UNCHANGED <<term, votedFor, log, role, votes, commit, stored>>

Next ==
    \/ \E s \in Server : Timeout(s) \/ BecomeLeader(s) \/ Restart(s)
    \/ \E s \in Server, v \in Values : ClientWrite(s, v)
    \/ \E s, p \in Server, i \in Nat : Replicate(s, p, i)
    \/ \E s \in Server, i \in Nat : AdvanceCommit(s, i)
    \/ \E s \in Server, m \in msgs :
          GrantVote(s, m) \/ CountVote(s, m) \/ Accept(s, m) \/ Acknowledged(s, m)
          \/ StepDown(s, m)
    \/ \E m \in msgs : Lose(m)

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(* What the store relies on.                                               *)

\* One leader per term: two election quorums share a voter, who votes once per term.
ElectionSafety ==
    \A s, p \in Server : role[s] = "leader" /\ role[p] = "leader" /\ term[s] = term[p]
                         => s = p

\* Two logs with an entry of the same index and term agree on every entry up to it.
LogMatching ==
    \A s, p \in Server : \A i \in 1..Min(Len(log[s]), Len(log[p])) :
        log[s][i].term = log[p][i].term =>
            SubSeq(log[s], 1, i) = SubSeq(log[p], 1, i)

\* Whatever any server has seen committed is in the log of every leader of a later term:
\* the election quorum that chose it meets the replication quorum that stored it.
LeaderCompleteness ==
    \A s, l \in Server : \A i \in 1..commit[s] :
        (role[l] = "leader" /\ term[l] > log[s][i].term) =>
            /\ Len(log[l]) >= i
            /\ log[l][i] = log[s][i]

\* No two servers apply different entries at one index: the store's replicas agree.
StateMachineSafety ==
    \A s, p \in Server : \A i \in 1..Min(commit[s], commit[p]) : log[s][i] = log[p][i]
=============================================================================
