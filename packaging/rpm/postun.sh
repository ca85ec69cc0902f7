# %postun, as %systemd_postun_with_restart inplaced.service expands: reload units, and on upgrade
# restart the agent if it runs (it finishes kills under way on SIGTERM).
systemctl daemon-reload >/dev/null 2>&1 || :
if [ $1 -ge 1 ] ; then
    # Package upgrade, not uninstall
    systemctl try-restart inplaced.service >/dev/null 2>&1 || :
fi
