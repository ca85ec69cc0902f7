# %post, as %systemd_post inplaced.service expands: on first installation, apply the presets
# (whether the unit is enabled is the distribution's or the admin's preset policy).
if [ $1 -eq 1 ] ; then
    # Initial installation
    systemctl --no-reload preset inplaced.service >/dev/null 2>&1 || :
fi
