# %preun, as %systemd_preun inplaced.service expands: on removal (not upgrade), disable and stop.
if [ $1 -eq 0 ] ; then
    # Package removal, not upgrade
    systemctl --no-reload disable --now inplaced.service >/dev/null 2>&1 || :
fi
