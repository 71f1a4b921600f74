; Inno Setup script for the Windows installer of bayescope.
;
; Wraps the PyInstaller folder built from packaging/bayescope.spec (build\windows\dist\bayescope)
; into one setup .exe. Installs for the current user by default (no administrator rights needed),
; adds a Start-menu entry and an optional desktop icon, and registers a clean uninstaller.
; The release workflow runs:  iscc /DAppVersion=0.1.0 packaging\windows\bayescope.iss
#ifndef AppVersion
  #define AppVersion "0.0.0"
#endif
#define Root "..\.."

[Setup]
AppId={{4B9AB113-236B-4491-B3AA-F86F894228EF}
AppName=bayescope
AppVersion={#AppVersion}
AppPublisher=bayescope developers
AppComments=See how sure image classifiers are of their answers
DefaultDirName={autopf}\bayescope
DefaultGroupName=bayescope
DisableProgramGroupPage=yes
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
OutputDir={#Root}\dist\windows
OutputBaseFilename=bayescope-{#AppVersion}-windows-x64-setup
SetupIconFile={#Root}\resources\icons\bayescope.ico
UninstallDisplayIcon={app}\bayescope.exe
Compression=lzma2/max
SolidCompression=yes
WizardStyle=modern

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[Files]
Source: "{#Root}\build\windows\dist\bayescope\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{autoprograms}\bayescope"; Filename: "{app}\bayescope.exe"
Name: "{autodesktop}\bayescope"; Filename: "{app}\bayescope.exe"; Tasks: desktopicon

[Run]
Filename: "{app}\bayescope.exe"; Description: "{cm:LaunchProgram,bayescope}"; Flags: nowait postinstall skipifsilent
