# Sourced by the scripts that run system tools (runuser, dockerd): the sbin directories are
# appended to PATH where it lacks them (cron, `env -i`, some CI runners), so those tools are
# found whatever PATH the caller had. Exported.
for polyloop_sbin in /usr/local/sbin /usr/sbin /sbin; do
    case ":$PATH:" in *":$polyloop_sbin:"*) ;; *) PATH="$PATH:$polyloop_sbin" ;; esac
done
export PATH
unset polyloop_sbin
