"""A Redis Cluster node's CLUSTER NODES reply, read: the address of the
master that serves a slot, as that node sees the cluster. scripts/hosts
master-of (scripts/hosts-redis.sh) names the host at that address.

    python3 -m hmdptools.cluster_nodes master-ip SLOT < REPLY

prints the IP of each master the reply names for SLOT, one a line: none
when no live master serves it, two when a node that saw a partition still
lists both (the caller takes neither).
"""
import sys


def masters_of_slot(reply, slot):
    """The IPs of the masters of REPLY whose slots take in SLOT: a node's
    flags (the third field) say `master` and not `fail` (nor `fail?`); its
    slots (the ninth field on) are `N` or `N-M`, and a slot being moved,
    `[N->-ID]` or `[N-<-ID]`, is not one it serves. The address is the
    second field's, `IP:PORT@BUS`."""
    ips = []
    for line in reply.splitlines():
        fields = line.split()
        if len(fields) < 3 or "master" not in fields[2] or "fail" in fields[2]:
            continue
        for field in fields[8:]:
            if not field[:1].isdigit():
                continue
            low, _, high = field.partition("-")
            if int(low) <= slot <= int(high or low):
                ips.append(fields[1].split(":")[0])
    return ips


def master_ip(slot):
    """`master-ip SLOT`: the reply on standard input."""
    for ip in masters_of_slot(sys.stdin.read(), int(slot)):
        print(ip)


COMMANDS = {"master-ip": master_ip}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in COMMANDS:
        print("usage: python3 -m hmdptools.cluster_nodes master-ip SLOT < CLUSTER_NODES_REPLY", file=sys.stderr)
        return 2
    return COMMANDS[argv[0]](*argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
